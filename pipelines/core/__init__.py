"""The bottom of our layers, above the sealed grader only: the raw-attempt contract, the warehouse, markup
escaping, the settings and the registry of imports they read."""
