"""Prompt templates and the model table, read as package data by kernelevo.agent.

Every word kernelevo sends to a model is in a file here; Python code only fills placeholders
(`$name`, string.Template syntax) from typed contexts.
"""
