"""The deliberate store's backends, behind one seam (`backend.py`): SQLite today."""
