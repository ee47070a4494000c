"""A whole model in parts: run it once, see where its time goes, write its hot submodules as
standalone KernelBench task files that the search and the bench already take, and hand the model
back with verified kernels in place.

record.py builds and runs the model with its constructor arguments, call-site inputs, outputs and
inclusive times recorded per submodule; construct.py finds how each part is built again (its own
constructor's arguments, those of the instance it is a copy of, or its attributes); call.py states a
call site's call and output as a task takes them (tensors as inputs, the outputs the model uses);
split.py chooses the parts (containers opened, parts that cannot be rebuilt standalone opened into
their children, identical parts folded into one task) and keeps the map from tasks to call sites in
split.json; task_file.py writes a part as a task file and
checks that the file rebuilds its call site's output from the captured inputs and weights;
region.py traces the forward of a module with time of its own, region_cut.py cuts it into regions
(the torch calls between its submodule calls), region_file.py writes and checks each as a task file,
and rewrite.py writes the module's forward again with its regions as kernel calls;
drop_in.py writes the model with kernels in place as one file (custom ops, `apply(model)`);
assemble.py chooses the kernels to place and reverts, one by one, those the judge rejects in place.
headroom.py measures each written part's baselines through the judge's door (judge.api), and effect.py
reads the judge's timings of the model in each mode to keep each part only where it earns its place;
the archive is reached by the caller (evolution/drivers/whole.py).
"""
