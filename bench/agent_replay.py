#!/usr/bin/env python3
# agent_replay.py --port N [--api messages|chat] [--turns 20] [--system 12000] [--target 30000]
#                 [--max-tokens 24] [--run NAME]: a scripted coding-agent conversation replayed
# against ft serve (or any server of the two APIs), as a coding agent drives one: a system
# prompt of about --system tokens with tool definitions and instructions (a coding agent's
# are 10k-20k tokens), then turns of tool results growing the conversation to about --target
# prompt tokens by the last turn; every request sends the whole conversation again, the
# assistant's own earlier replies included. Prints one JSON line per turn (prompt tokens, tokens the
# server read from its prefix cache, TTFT: request sent to the first generated text, and the
# turn's wall time) and a summary line. Standard library only: it runs on the GPU machine.
#
# The tool definitions and calls are plain text in the messages (ft answers the API's tool
# fields with a 400 until it implements them); what matters here is the prompt's shape. --run
# is written into the first line of the system prompt, so runs through another API or mode
# on the same server share nothing.
import argparse, http.client, json, random, sys, time

TOOLS = [
    ('read_file', 'Read a file of the repository. Arguments: path (string), offset (line, optional), limit (lines).'),
    ('write_file', 'Replace a file with new content. Arguments: path (string), content (string).'),
    ('edit_file', 'Replace one exact string of a file with another. Arguments: path, old_string, new_string.'),
    ('bash', 'Run a shell command in the repository root and return its output. Arguments: command, timeout_s.'),
    ('grep', 'Search the repository for a regular expression. Arguments: pattern, path (optional), glob.'),
    ('list_dir', 'List a directory. Arguments: path (string), depth (integer, default 1).'),
    ('run_tests', 'Run the test suite or some tests. Arguments: filter (string, optional).'),
    ('web_fetch', 'Fetch a URL and return its text. Arguments: url (string), max_bytes (integer).'),
]
WORDS = ('buffer size count index value result error state token block cache layer head queue request reply '
         'stream offset length table entry node parent child prefix match evict budget step chunk batch').split()


def system_prompt(run, n_chars):
    lines = [f'Session {run}. You are a coding agent working in a C repository. Think, then call one tool.',
             'Call a tool by writing <tool name="NAME">{json arguments}</tool>. The tools:']
    for name, desc in TOOLS:
        schema = {'name': name, 'description': desc, 'input_schema': {'type': 'object', 'properties': {
            a.split()[0].strip(',:'): {'type': 'string'} for a in desc.split('Arguments: ')[1].split(', ')}}}
        lines.append(json.dumps(schema))
    rules = ['Read a file before you change it.', 'Run the tests after each change.', 'Keep functions short.',
             'Report what you measured, with the command that produced it.', 'Never guess a path: list it.',
             'Quote the failing line when a test fails.', 'Prefer the smallest change that fixes the cause.']
    n, k = sum(len(l) + 1 for l in lines), 0
    while n < n_chars:
        l = f'Rule {k + 1}: {rules[k % len(rules)]} ({TOOLS[k % len(TOOLS)][0]} applies; see section {k // 7 + 1}.)'
        lines.append(l)
        n, k = n + len(l) + 1, k + 1
    return '\n'.join(lines)


def tool_result(rng, turn, n_chars):
    name = TOOLS[turn % len(TOOLS)][0]
    out, n = [f'<result tool="{name}" turn="{turn}">'], 0
    while n < n_chars:
        w = [rng.choice(WORDS) for _ in range(rng.randint(5, 9))]
        line = f'{rng.randint(1, 999):4d}  static int {"_".join(w[:2])}(struct {w[2]} *{w[3]}) {{ return {" + ".join(w[3:])}; }}'
        out.append(line)
        n += len(line) + 1
    out.append('</result>')
    return '\n'.join(out)


def request(port, api, system, messages, max_tokens):
    """Streams one reply; returns (text, ttft_s, wall_s, prompt_tokens, cached_tokens)."""
    if api == 'messages':
        path = '/v1/messages'
        body = {'model': 'ft', 'max_tokens': max_tokens, 'temperature': 0, 'stream': True, 'system': system,
                'messages': messages}
    else:
        path = '/v1/chat/completions'
        body = {'model': 'ft', 'max_tokens': max_tokens, 'temperature': 0, 'stream': True,
                'stream_options': {'include_usage': True},
                'messages': [{'role': 'system', 'content': system}] + messages}
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=3600)
    t0 = time.time()
    c.request('POST', path, json.dumps(body), {'content-type': 'application/json'})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f'{path}: HTTP {r.status}: {r.read()[:300]!r}')
    text, ttft, prompt, cached = [], None, -1, -1
    for raw in r:
        line = raw.strip()
        if not line.startswith(b'data: ') or line == b'data: [DONE]':
            continue
        j = json.loads(line[6:])
        piece = ''
        if api == 'messages':
            if j.get('type') == 'message_start':
                u = j['message']['usage']
                cached = u.get('cache_read_input_tokens', 0)
                prompt = u['input_tokens'] + cached
            elif j.get('type') == 'content_block_delta':
                d = j['delta']
                piece = d.get('text') or d.get('thinking') or ''
        else:
            if j.get('usage'):
                prompt = j['usage']['prompt_tokens']
                cached = j['usage'].get('prompt_tokens_details', {}).get('cached_tokens', 0)
            for ch in j.get('choices', []):
                d = ch.get('delta', {})
                piece = (d.get('content') or '') + (d.get('reasoning_content') or '')
        if piece and ttft is None:
            ttft = time.time() - t0
        text.append(piece)
    wall = time.time() - t0
    c.close()
    return ''.join(text), ttft if ttft is not None else wall, wall, prompt, cached


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--port', type=int, required=True)
    ap.add_argument('--api', choices=['messages', 'chat'], default='messages')
    ap.add_argument('--turns', type=int, default=20)
    ap.add_argument('--system', type=int, default=12000, help='tokens of the system prompt, about')
    ap.add_argument('--target', type=int, default=30000, help='prompt tokens of the last turn, about')
    ap.add_argument('--max-tokens', type=int, default=24)
    ap.add_argument('--run', default='')
    a = ap.parse_args()
    rng = random.Random(7)
    system = system_prompt(a.run or a.api, int(a.system * 3.5))
    messages = [{'role': 'user', 'content': 'The test server_prefix_cache fails after my change to '
                 'src/kv/prefix_cache.c. Find out why and fix it.'}]
    chars_per_token, wall0, rows = 4.0, time.time(), []
    for turn in range(1, a.turns + 1):
        text, ttft, wall, prompt, cached = request(a.port, a.api, system, messages, a.max_tokens)
        row = {'api': a.api, 'run': a.run, 'turn': turn, 'prompt_tokens': prompt, 'cached_tokens': cached,
               'ttft_s': round(ttft, 4), 'wall_s': round(wall, 4)}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if turn == 1 and prompt > 0:
            chars_per_token = sum(len(m['content']) for m in messages + [{'content': system}]) / prompt
        # the reply goes back as the agent's turn, then a tool result sized to reach the target
        messages.append({'role': 'assistant', 'content': text or '<tool name="read_file">{"path": "src/kv/prefix_cache.c"}</tool>'})
        left = a.turns - turn
        if left:
            grow = max(200, (a.target - max(prompt, 0)) / left)
            messages.append({'role': 'user', 'content': tool_result(rng, turn, int(grow * chars_per_token))})
    total = time.time() - wall0
    later = [r['ttft_s'] for r in rows[1:]]
    print(json.dumps({'api': a.api, 'run': a.run, 'summary': True, 'turns': a.turns, 'wall_s': round(total, 3),
                      'last_prompt_tokens': rows[-1]['prompt_tokens'],
                      'ttft_turn1_s': rows[0]['ttft_s'],
                      'ttft_median_later_s': sorted(later)[len(later) // 2] if later else None,
                      'cached_tokens_total': sum(max(r['cached_tokens'], 0) for r in rows),
                      'prompt_tokens_total': sum(max(r['prompt_tokens'], 0) for r in rows)}), flush=True)


if __name__ == '__main__':
    main()
