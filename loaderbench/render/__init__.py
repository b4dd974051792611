"""Everything a person reads: the only place that knows units, colour, width and English
sentences. `sweep` (table, markdown, CSV, JSON of a sweep), `findings` (the recommendation's
sentences), `compare`, `storage`, `env`, `plot`. Renderers format what analysis/ concluded;
they never measure and never mutate."""
