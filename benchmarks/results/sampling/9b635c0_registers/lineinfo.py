"""Copy a kernel folder with its vocabulary cubins recompiled with -lineinfo (for ncu's source view)."""
import hashlib, json, shutil, subprocess, sys
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
inc = open("/tmp/inc.txt").read().split()
if dst.exists():
    shutil.rmtree(dst)
shutil.copytree(src, dst, ignore=shutil.ignore_patterns("c"))
m = json.loads((dst / "manifest.json").read_text())
keep = []
for v in m["variants"]:
    if v["target"] != "cuda":
        continue
    keep.append(v)
    if "sample" in v["family"] and "rejection" not in v["family"]:
        art = dst / v["artifact"]
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-std=c++17", "-w", "-lineinfo", *inc, "-o", str(art), str(dst / v["source"])], check=True)
        v["sha256"] = hashlib.sha256(art.read_bytes()).hexdigest()
m["variants"] = keep
m["targets"] = ["cuda"] if isinstance(m.get("targets"), list) else m.get("targets")
(dst / "manifest.json").write_text(json.dumps(m, indent=1))
print("ok", len(keep))
