"""The gpurag version (imported by the package root, the store and the rerankers without
going through the package root, which imports the API)."""

__version__ = "0.1.0"
