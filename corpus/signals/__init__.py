"""What annotate computes, each a pure function of the text (or a model that ships with a package or
with the project): language ID, Gopher/C4 heuristics, the quality classifier and PII scrubbing. They
produce numbers; the keep/drop decision is ``corpus.select.policy``'s, from the stored numbers."""
