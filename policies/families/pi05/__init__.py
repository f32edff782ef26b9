"""pi0.5 (physical intelligence): its IO and built-ins, and its checkpoint loading (the layouts it reads are told apart in policies/checkpoints/)."""
