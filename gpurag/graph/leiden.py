def hierarchical_leiden(*a, **k): raise NotImplementedError
def modularity(*a, **k): raise NotImplementedError
