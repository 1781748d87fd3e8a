def check(k): return []
def ensure_valid(k): pass
class Problem: pass
