# serve_load.py PORT [CLIENTS] [REQUESTS] [CANCEL_FRACTION]: the request mix of
# tests/server/load.mjs (16 streaming clients, 200 greedy chat requests of mixed lengths, a
# fraction cancelled mid-stream) as a benchmark for machines without node (the GPU machine):
# prints requests/s and aggregate tok/s. It checks only that each completed stream ends with
# [DONE]; the output checks (near-tie rule, KV back to zero) are load.mjs's.
import http.client, json, sys, threading, time
args = sys.argv[1:] + ['16', '200', '0.1'][len(sys.argv) - 2:]
port, clients, total, cancel_frac = int(args[0]), int(args[1]), int(args[2]), float(args[3])
prompts = ['Hello', 'Tell me a story about a fox', 'What is 2 + 2?',
           'Write a long essay on the history of the printing press and its effects on Europe']
lengths = [8, 32, 64, 128]
lock = threading.Lock()
state = {'next': 0, 'completed': 0, 'cancelled': 0, 'tokens': 0}

def stream(prompt, n, cancel_after):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=300)
    body = json.dumps({'messages': [{'role': 'user', 'content': prompt}], 'max_tokens': n, 'temperature': 0,
                       'stream': True, 'stream_options': {'include_usage': True}, 'logprobs': True, 'top_logprobs': 2})
    c.request('POST', '/v1/chat/completions', body, {'content-type': 'application/json'})
    r = c.getresponse()
    assert r.status == 200, r.status
    events, tokens, done = 0, -1, False
    while True:
        line = r.readline()
        if not line: break
        line = line.strip()
        if not line: continue
        assert line.startswith(b'data: '), line
        data = line[6:]
        events += 1
        if data == b'[DONE]':
            done = True
            continue
        j = json.loads(data)
        if j.get('usage'): tokens = j['usage']['completion_tokens']
        if cancel_after >= 0 and events > cancel_after:
            c.close()
            return None
    c.close()
    assert done
    return tokens

def client():
    while True:
        with lock:
            k = state['next']
            if k >= total: return
            state['next'] += 1
        p, n = prompts[k % len(prompts)], lengths[(k >> 2) % len(lengths)]
        cancel = (k * 7919) % 100 < cancel_frac * 100
        t = stream(p, n, 2 + (k % 5) if cancel else -1)
        with lock:
            if t is None: state['cancelled'] += 1
            else:
                state['completed'] += 1
                state['tokens'] += t

for p in prompts:
    for n in lengths: stream(p, n, -1)  # warm-up, as load.mjs's alone runs
t0 = time.time()
ts = [threading.Thread(target=client) for _ in range(clients)]
for t in ts: t.start()
for t in ts: t.join()
s = time.time() - t0
print(f"serve_load: {clients} clients, {total} requests ({state['completed']} completed, {state['cancelled']} cancelled) "
      f"in {s:.2f} s: {total / s:.1f} requests/s, {state['tokens'] / s:.0f} tok/s aggregate")
