"""The imperative shell around the kernel: projects, services, the turn driver."""
