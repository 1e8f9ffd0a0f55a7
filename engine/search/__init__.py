"""Search strategies of one step: the Pareto frontier and its types, parent selection,
minibatch sampling, the reflection prompt and its answer, a proposal, merges and lineage."""
