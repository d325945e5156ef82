"""The Dagster wiring: the Definitions (assets of `assets/`, their checks, jobs) built from the settings, the
resources they run with, and the Great Expectations gate the checks apply."""
