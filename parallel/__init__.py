"""Tensor-parallel process groups (NCCL on GPUs, gloo on the CPU) and the local rank launcher."""
