import time, numpy as np, scipy.sparse as sp, cupy as cp, cupyx.scipy.sparse as csp
import ust
from ust.api.linalg import _OneShotSolver
n=100
a = sp.csr_array(sp.random_array((n, n), density=0.05, format="csr", rng=0) + n * sp.eye_array(n, format="csr"))
A = csp.csr_matrix(a); x = cp.asarray(np.random.default_rng(2).random(n))
for _ in range(20): ust.solve(A,x)
cp.cuda.Device().synchronize()
ph={k:[] for k in ("ctor","plan","fact","solve","free")}
for i in range(200):
    t0=time.perf_counter(); s=_OneShotSolver(A,x); t1=time.perf_counter(); s.plan(); t2=time.perf_counter(); s.factorize(); t3=time.perf_counter(); s.solve(); t4=time.perf_counter(); s.free(); cp.cuda.Device().synchronize(); t5=time.perf_counter()
    for k,v in zip(ph,(t1-t0,t2-t1,t3-t2,t4-t3,t5-t4)): ph[k].append(v)
print({k:round(float(np.median(v))*1e6,1) for k,v in ph.items()})
from ust.backends.cuda.dense_lu import DeviceLapack
lap=DeviceLapack(0,0)
full=A
def tm(f, name, reps=200):
    f(); cp.cuda.Device().synchronize()
    t0=time.perf_counter()
    for _ in range(reps): f()
    cp.cuda.Device().synchronize()
    print(name, round((time.perf_counter()-t0)/reps*1e6,1))
tm(lambda: lap.densify(full), "densify")
d=lap.densify(full)
tm(lambda: lap.getrf(d.copy(order="F")), "getrf (+sync)")
lu,piv,_,_=lap.getrf(d.copy(order="F"))
b=cp.ones((n,1),order="F")
tm(lambda: lap.getrs(lu,piv,b), "getrs")
tm(lambda: lap.rcond(lu,piv,1.0), "rcond")
import cupyx.scipy.sparse.linalg as cspl
tm(lambda: cspl.spsolve(A,x), "cupy spsolve", 50)
tm(lambda: cp.linalg.solve(d, x), "cupy dense solve")
import cProfile, pstats
pr=cProfile.Profile(); pr.enable()
for _ in range(100): ust.solve(A,x)
pr.disable(); pstats.Stats(pr).sort_stats("tottime").print_stats(25)
