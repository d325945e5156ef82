"""What a release is made of: workload families, the held-out split policy and its frozen manifests, the
leakage checks between splits, and the learning comparison of two checkpoints on held-out tasks."""
