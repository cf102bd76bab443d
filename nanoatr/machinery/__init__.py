"""The run machinery: what keeps a run safe and reproducible, behind the core.

Skip it on a first reading: nothing in the core imports it; the commands are where the two meet. Its
modules, and what each guarantees: docs/library.md."""
