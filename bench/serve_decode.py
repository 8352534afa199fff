# serve_decode.py PORT [MAX_TOKENS] [PROMPT_WORDS]: decode speed and time to first token of
# `ft serve` as a client sees them, over the public streaming API (/v1/chat/completions).
#
# Sends the same greedy request twice, a cold one then a warm one (the expert cache and the
# page cache already hold what the first touched), with ignore_eos so both decode MAX_TOKENS
# tokens. For each: TTFT = time of the first content token - time the request was sent;
# decode tok/s = (completion tokens - 1) / (time of the last token - time of the first).
# Prints one line per request and, with --json, one JSON object on the last line.
# Standard library only (the GPU machine has python3 but no pip packages).
import http.client, json, sys, time

def run(port, max_tokens, prompt):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=600)
    body = json.dumps({'messages': [{'role': 'user', 'content': prompt}], 'max_tokens': max_tokens,
                       'temperature': 0, 'ignore_eos': True, 'stream': True,
                       'stream_options': {'include_usage': True}})
    sent = time.perf_counter()
    c.request('POST', '/v1/chat/completions', body, {'content-type': 'application/json'})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f'serve_decode: HTTP {r.status}: {r.read()[:300]!r}')
    first = last = None
    tokens = None
    while True:
        line = r.readline()
        if not line: break
        line = line.strip()
        if not line.startswith(b'data: '): continue
        data = line[6:]
        if data == b'[DONE]': break
        j = json.loads(data)
        if j.get('usage'): tokens = j['usage']['completion_tokens']
        for ch in j.get('choices', []):
            d = ch.get('delta', {})
            if d.get('content') or d.get('reasoning_content'):
                now = time.perf_counter()
                if first is None: first = now
                last = now
    c.close()
    if tokens is None or first is None:
        raise SystemExit('serve_decode: the stream carried no tokens or no usage')
    decode = (tokens - 1) / (last - first) if tokens > 1 and last > first else 0.0
    return {'ttft_s': first - sent, 'completion_tokens': tokens, 'decode_tok_s': decode}

def main():
    args = [a for a in sys.argv[1:] if a != '--json']
    if not args:
        raise SystemExit('usage: serve_decode.py PORT [MAX_TOKENS] [PROMPT_WORDS] [--json]')
    port = int(args[0])
    max_tokens = int(args[1]) if len(args) > 1 else 128
    words = int(args[2]) if len(args) > 2 else 64
    prompt = ' '.join(['the quick brown fox jumps over the lazy dog'] * (words // 9 + 1)).split()[:words]
    prompt = 'Continue this text: ' + ' '.join(prompt)
    out = {}
    for name in ('cold', 'warm'):
        r = run(port, max_tokens, prompt)
        out[name] = r
        print(f"{name}: TTFT {r['ttft_s'] * 1000:.0f} ms, {r['completion_tokens']} tokens, "
              f"decode {r['decode_tok_s']:.1f} tok/s", flush=True)
    if '--json' in sys.argv: print(json.dumps(out))

if __name__ == '__main__':
    main()
