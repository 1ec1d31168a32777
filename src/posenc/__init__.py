"""posenc: sum, concatenate, or drop the positional encoding? A replication of Table 3 (E) of
Vaswani et al. 2017 with two added variants."""
