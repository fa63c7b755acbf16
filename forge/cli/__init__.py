"""The command line: Click parses, calls one library function, renders through output.py."""
