"""The base every ring stands on: settings, errors, the lazy logger, file I/O, timestamps, the llama.cpp server client, token counts and the notes' words."""
