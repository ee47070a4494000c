"""Is a host-clock 'escaped_work' refusal the candidate's doing or its neighbours'? (issue 52)

    python benchmarks/escaped_work_probe.py CANDIDATE.py SIBLING.py     # a 4096x4096 fp32 GEMM candidate

Times the candidate against torch.matmul as crosscheck.host_clock does (one call each in turn, the device
synchronised around each, median of 25: wall minus CUDA-event time, the candidate's less eager's), alone, then
while other processes do what sibling candidates' builds do on the same GPU (a fresh process: a CUDA context,
an NVRTC build and module load of SIBLING), then beside a process running GEMMs. Record:
benchmarks/results/escaped_work_probe-H200-2026-11-30.txt."""
import importlib.util, subprocess, sys, time
import torch
from kernelevo.judge.measure.crosscheck import _host_and_events

def load(path):
    spec = importlib.util.spec_from_file_location("cand" + str(abs(hash(path))), path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m

cand_path, sib_path = sys.argv[1], sys.argv[2]
N = 4096
A, B = torch.rand(N, N, device="cuda"), torch.rand(N, N, device="cuda")
cand = load(cand_path).ModelNew().cuda()
fns = {"candidate": lambda a: cand(*a), "eager": lambda a: torch.matmul(*a)}
for _ in range(3):
    fns["candidate"]([A, B]); fns["eager"]([A, B])
torch.cuda.synchronize()
CHURN = ("import importlib.util,sys,torch; torch.zeros(1,device='cuda'); s=importlib.util.spec_from_file_location('s',sys.argv[1]);"
         "m=importlib.util.module_from_spec(s); s.loader.exec_module(m); torch.cuda.synchronize()")
def churn(n):
    return subprocess.Popen(["bash", "-c", f"for i in $(seq {n}); do {sys.executable} -c \"{CHURN}\" {sib_path}; done"])
def show(label):
    out = _host_and_events(fns, [A, B], 25)
    (e, w, g, *_), (ee, ew, eg, *_) = out["candidate"], out["eager"]
    print(f"{label:28s} cand event {e:.3f} wall {w:.3f} gap {g:.3f} | eager event {ee:.3f} wall {ew:.3f} gap {eg:.3f} | escaped {g-eg:.3f}", flush=True)
show("alone")
show("alone")
p = churn(3)
t0 = time.time()
while p.poll() is None:
    show(f"beside builds t+{time.time()-t0:.0f}s")
show("alone after")
# a sibling holding the GPU busy (its own kernels) rather than building
busy = subprocess.Popen([sys.executable, "-c", "import torch,time; a=torch.rand(4096,4096,device='cuda'); t=time.time()\nwhile time.time()-t<8: a@a; torch.cuda.synchronize()"])
time.sleep(2)
show("beside a busy process")
busy.wait()
show("alone at end")
