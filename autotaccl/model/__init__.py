"""The model of the world every stage reads: hardware profiles, the topology graph, collectives and the algorithm IR."""
