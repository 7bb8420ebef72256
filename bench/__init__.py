"""``specgen bench``: the harness that decodes with every boundary mode side by side, its settings,
the kernel-level pass over torch.profiler traces, the cost-model calibration, reports and plots."""
