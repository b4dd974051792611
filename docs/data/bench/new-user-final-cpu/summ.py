import json,sys
for f in sys.argv[1:]:
    d=json.load(open(f))
    print('==',f, d['created_utc'])
    for r in d['results']:
        s=r.get('summary') or {}
        w=r['settings']['num_workers']
        if r['status']!='ok': print(w, r['status'], str(r.get('error'))[:100]); continue
        print(f"w={w} sps={s.get('samples_per_s') or 0:.0f} unc=±{100*(s.get('uncertainty') or 0):.1f}% ceil={s.get('loader_ceiling_samples_per_s')} bound={s.get('loader_ceiling_bound_samples_per_s')}({s.get('loader_ceiling_bound')}) idle={s.get('idle_workers')} wb={s.get('worker_batches')} probe={s.get('idle_probe_batches')} verdict={s.get('verdict')} measured={r.get('detail')}")
