"""Kernel-family templates (jinja2) and the generated-package template."""
