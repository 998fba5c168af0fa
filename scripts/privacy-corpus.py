#!/usr/bin/env python3
"""Writes testdata/privacy/{rejected,accepted}.jsonl: secret-shaped and private-host values that
the ledger must refuse in every durable text field (ledger-core §4), and near-misses it must keep.
Deterministic: the same output on every run. Each line: {"family": ..., "value": ...}."""
import json, os, random

rng = random.Random(20261130)
ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
def rand(n, alphabet=ALNUM): return "".join(rng.choice(alphabet) for _ in range(n))

rejected = []
def add(family, *values):
    for v in values: rejected.append({"family": family, "value": v})

for p in ["ghp", "gho", "ghu", "ghs", "ghr", "GHP", "Ghs"]:
    add("github-token", f"{p}_{rand(36)}")
add("github-token", f"github_pat_{rand(22)}_{rand(59)}", f"GITHUB_PAT_{rand(30)}", f"token-ghp_{rand(20)}-x")
add("openai-key", f"sk-{rand(48)}", f"sk-proj-{rand(40)}", f"SK-{rand(20)}", f"key.sk-{rand(16)}")
add("npm-token", f"npm_{rand(36)}", f"x.npm_{rand(36)}", f"NPM_{rand(36)}")
for p in ["xoxb", "xoxp", "xoxa", "xoxs", "xoxr", "XOXB"]:
    add("slack-token", f"{p}-{rand(10,'0123456789')}-{rand(12)}")
for p in ["AKIA", "ASIA", "akia"]:
    add("aws-key-id", f"{p}{rand(16, UPPER)}", f"id:{p}{rand(16, UPPER)}")
def b64url(n): return rand(n, ALNUM + "-_")
add("jwt", f"eyJ{b64url(20)}.eyJ{b64url(40)}.{b64url(43)}", f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.{b64url(30)}",
    f"auth.eyJ{b64url(8)}.eyJ{b64url(8)}.{b64url(16)}")
for word in ["Bearer", "bearer", "Authorization", "api_key", "api-key", "apikey", "api_token", "ApiToken",
             "access_token", "access-token", "client_secret", "clientSecret", "cloudflare_api_token",
             "cloudflare-api-key", "CLOUDFLARE_TOKEN"]:
    for sep in [":", "="]:
        add("credential-assignment", f"{word}{sep}{rand(24, ALNUM + '._~+/-')}")
add("credential-assignment", f"Bearer {rand(32)}", f"Authorization: Bearer {rand(32)}", f"api_key%20{rand(20)}")
add("basic-auth", "Basic:dXNlcjpwYXNzd29yZA==", "basic+YWxpY2U6c2VjcmV0", "Basic dXNlcjpwYXNz", "BASIC:QUJDRA==")
add("private-key", "BEGIN RSA PRIVATE KEY", "-----BEGIN OPENSSH PRIVATE KEY-----", "BEGIN EC PRIVATE KEY", "BEGIN PRIVATE KEY")
add("email", "alice@example.com", "a.b+c@corp.example.org", "x@y", "bot@localhost", "Dev.Ops@Example.COM",
    "first_last@sub.domain.io", "user%40example.com", "mailto:carol@example.net", "team-x@z9")
for base in ["10.0.0.1", "10.255.255.254", "127.0.0.1", "127.1.2.3", "172.16.5.4", "172.31.0.1", "192.168.1.10",
             "100.64.1.1", "100.127.255.1", "169.254.169.254"]:
    add("private-ipv4", base, f"host-{base}", f"http://{base}/path", f"{base}:8080")
add("ipv4-alias", "0177.0.0.1", "010.0.0.1", "0300.0250.0.1", "127.000.000.001", "http://127.1", "http://10.1",
    "http://192.168.1", "http://0x7f.0.0.1", "http://0x7f000001", "http://2130706433", "http://017700000001",
    "https://0x7f.1/x", "http://0xa.0.0.1", "ws://127.1:80", "ftp://10.1.2")
add("ipv6", "::1", "[::1]", "0:0:0:0:0:0:0:1", "[0:0:0:0:0:0:0:1]:8080", "fc00::1", "fd12:3456::1", "fe80::1",
    "[fe80::abcd]:443", "::ffff:127.0.0.1", "::ffff:7f00:1", "::ffff:10.0.0.1", "::ffff:a00:1", "::ffff:c0a8:101",
    "::7f00:1", "::a9fe:a9fe", "http://[::1]/", "https://[fd00::1]:8443/x", "[::ffff:ac10:1]")
add("internal-host", "localhost", "localhost:8080", "LOCALHOST", "printer.local", "svc.corp", "svc.corp:443", "db.internal",
    "internal.example.com", "intranet.example.com", "router.home.arpa", "box.lan", "nas.home", "http://localhost",
    "https://db.internal/x", "http:localhost:8080", "api.localhost", "x/printer.local/y", "git@gitlab.corp")
add("url-userinfo", "https://user:pw@github.com/x", "ftp://anon@files.example.com", "ssh://git@github.com/o/r",
    "http:user@example.com", "wss://token@socket.example.com", "https://:secret@example.com")
add("posix-path", "/home/alice/.ssh/id_rsa", "/Users/bob/Library", "/tmp/build/output", "/private/var/folders/x",
    "s3:/bucket/key", "cache:/srv/data", "x/home/y/", "run/tmp/z", "/HOME/Carol/x")
add("windows-path", "C:\\Users\\alice", "C:/Windows/System32", "\\Users\\bob\\", "d:\\work\\x", "D:/temp", "x\\USERS\\y")
add("percent-encoded", "a%2Fb", "%41%42", "records%2Fsecret", "x%20y", "%2e%2e", "name%3Dvalue")
add("file-url", "file:///etc/passwd", "file:/etc/hosts", "FILE://server/share", "cache:file:data")

accepted = []
def keep(family, *values):
    for v in values: accepted.append({"family": family, "value": v})
keep("public-host", "github.com", "api.github.com", "https://github.com/openclaw/clawsweeper", "example.com",
     "registry.npmjs.org", "8.8.8.8", "1.1.1.1", "172.32.0.1", "192.169.0.1", "100.128.0.1", "169.255.0.1",
     "11.0.0.1", "126.0.0.1", "2001:4860:4860::8888")
keep("version", "1.2.3", "v2.0.1", "10.0.0", "1.2.3.4", "2026.11.30", "0.1.0-beta.2", "v1.0.0+build.7")
keep("model", "gpt-5.1-codex", "claude-3-5-sonnet", "o4-mini", "llama-3.1-70b", "gemini-2.5-pro")
keep("hex-id", "deadbeefcafebabe", "0123456789abcdef0123456789abcdef01234567", rand(64, "0123456789abcdef"), "PR_kwDOAbc123")
keep("repository", "openclaw/clawsweeper", "example-org/widgets", "owner/name.js")
keep("relative-path", "records/openclaw/items/42.md", "artifacts/reviews/issue-1.json", "results/review/42.json")
keep("word", "token_count", "tokens", "tokenizer", "secretary", "author", "passwordless", "cookie_jar", "apikeys",
     "bearer_count", "basic", "basic-plan", "private", "home", "tmp", "users", "local", "internal", "corp",
     "review.item", "retry_from_durable_ledger", "mutation_attempted")
keep("short-token", "sk-short", "ghp_short", "npm_short", "xoxb-123", f"AKIA{rand(15, UPPER)}", "eyJabc.eyJdef.ghi")
keep("id", "13550726447", "run-42", "review-shard-0", "cluster:dup-17", "snap-2026-01-15", "rule-21", "queue_item:7")

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "privacy")
os.makedirs(here, exist_ok=True)
for name, rows in [("rejected.jsonl", rejected), ("accepted.jsonl", accepted)]:
    with open(os.path.join(here, name), "w") as f:
        for r in rows: f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
print(f"rejected: {len(rejected)}, accepted: {len(accepted)}")
