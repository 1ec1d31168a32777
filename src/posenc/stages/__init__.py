"""The pipeline's stages, one module per DVC stage: params and paths in, files out.

Each holds its stage's recipe and a `run(args)` that `posenc <stage>` calls. They import the
library (posenc.*) and never each other; what two stages or a benchmark share lives in the library.
"""
