import pickle, json, numpy as np, collections
d=pickle.load(open('/tmp/diag/fold.pkl','rb'))
ids=d['ids']; G=d['gpu']; S=d['st']; ref=d['ref']
sg=-np.mean(np.log(G/ref),1); ss=-np.mean(np.log(S/ref),1)
n=len(ids)
go=np.argsort(-sg,kind='stable'); so=np.argsort(-ss,kind='stable')
gt=set(go[:50]); stt=set(so[:50])
grank=np.empty(n,int); grank[go]=np.arange(n); srank=np.empty(n,int); srank[so]=np.arange(n)
print('overlap',len(gt&stt))
def ks(i):
    L=d['rows'][ids[i]]['launch']; k=dict(L.get('knobs',{})); k['block']=L['block'][0]
    if L.get('cluster'): k['cluster']=L.get('cluster')
    return json.dumps(k,sort_keys=True)
knobsets=collections.Counter(ks(i) for i in go[:50])
ksid={k:chr(65+j) for j,(k,_) in enumerate(knobsets.most_common())}
for i in so[:50]:
    if ks(i) not in ksid: ksid[ks(i)]=chr(65+len(ksid))
print('GPU top50 knob sets:')
for k,c in knobsets.most_common(): print(ksid[k],c, sum(ks(i)==k for i in so[:50]),'in static top50 |', k)
print('static-top50 knob sets:', collections.Counter(ksid[ks(i)] for i in so[:50]))
print('launch keys', d['rows'][ids[go[0]]]['launch'].keys())
pickle.dump(dict(sg=sg,ss=ss,go=go,so=so,grank=grank,srank=srank,ksid=ksid),open('/tmp/diag/ranks.pkl','wb'))
