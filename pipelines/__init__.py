"""kerneltraj's pipeline, in layers that import only downward: `cli` -> `defs` (with the assets of `assets/`)
-> `reporting`, `publishing`, `grading`, `curation`, `importers` -> `core` -> the sealed `grader`
(tests/project/test_layers.py holds the order)."""
