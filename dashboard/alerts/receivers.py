"""Signal receivers that connect the collectors to alert evaluation."""
