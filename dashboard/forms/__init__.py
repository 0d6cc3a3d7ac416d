from .fleet import EngineForm

__all__ = ["EngineForm"]
