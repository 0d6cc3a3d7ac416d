from .beat import StaticBeatEntry
from .controls import Launch
from .fleet import Engine, Host
from .launchconfig import AuditThreshold, ConfigSnapshot, EngineStart
from .ledgers import Incident, KVPoolEntry
from .samples import CollectorState, Rollup, Sample, Series

__all__ = [
    "AuditThreshold",
    "CollectorState",
    "ConfigSnapshot",
    "Engine",
    "EngineStart",
    "Host",
    "Incident",
    "KVPoolEntry",
    "Launch",
    "Rollup",
    "Sample",
    "Series",
    "StaticBeatEntry",
]
