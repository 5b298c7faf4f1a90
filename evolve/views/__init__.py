"""What people read of an experiment: ``rise show`` (a version), the per-round pages of ``rise evolve``, and
``rise report`` (static HTML with its plots and the morning page)."""
