import numpy as np, time, json
def best(f, n=5):
    t=[]; 
    for _ in range(n):
        s=time.perf_counter(); f(); t.append(time.perf_counter()-s)
    return min(t)
res={}
for mb in (32, 64, 1024):
    rows = mb*1024*1024//4//1024
    A=np.random.rand(rows,1024).astype(np.float32); x=np.ones(1024,np.float32)
    A@x
    res[f"gemv_read_gbps_{mb}MB"]=A.nbytes/best(lambda: A@x)/1e9
n=2048
B=np.random.rand(n,n).astype(np.float32); B@B
res["sgemm_gflops"]=2*n**3/best(lambda: B@B,3)/1e9
print(json.dumps(res,indent=1))
