"""Training and evaluating the GAT reranker (``gpurag train-scorer``, cross-validation,
synthetic questions): tools over indexes and the evaluation, above the engine. The reranker
itself (model, features, loading) is :mod:`gpurag.rerank`."""
