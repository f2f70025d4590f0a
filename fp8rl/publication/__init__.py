"""A tier's publication: its report copied whole into `results/published/{tier}/` with its provenance
and checked against its own manifest (fp8rl.publication.publish: `fp8rl publish`, and the check
`fp8rl quotes` and `fp8rl check` run before they read one), and a fresh tier's metrics checked against
the bands a publication gives (fp8rl.publication.bands: `fp8rl check`). It reads the report's file
layout (fp8rl.report.paths); the report never imports it.
"""
