"""Elastic jobs, framework-free: who is in the job (membership), how it changes (world: shrink, spawn), the run loop
and the state objects. Each binding's `elastic` module passes its own `broadcast_object` in."""
