"""Model families written only as test fixtures (toy_family.py: what adding a family takes)."""
