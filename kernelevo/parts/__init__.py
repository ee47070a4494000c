"""A whole model in parts: run it once, see where its time goes, and write its hot submodules as
standalone KernelBench task files that the search and the bench already take.

record.py builds and runs the model with its constructor arguments, call-site inputs, outputs and
inclusive times recorded per submodule; split.py chooses the parts (containers opened, parts that
cannot be rebuilt standalone opened into their children, identical parts folded into one task),
writes each as a task file, checks that the file rebuilds its call site's output from the captured
inputs and weights, and keeps the map from tasks to call sites in split.json.
"""
