"""The read path of the deliberate store: a question's channels, their fusion, the cutoff, neighbours, refusal, the hot block, batch recall and calibration."""
