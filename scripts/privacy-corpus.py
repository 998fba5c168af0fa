#!/usr/bin/env python3
"""Writes testdata/privacy/{rejected,accepted}.jsonl: secret-shaped and private-host values that
the ledger must refuse in every durable text field (the reference's privacy boundary), and near-misses it must keep;
and {strict-rejected,near-miss}.jsonl: values the reference accepts that the strict profile refuses
(src/privacy/strict.rs), and near-misses both profiles keep. All values are synthetic: random
characters of the right shape, never a real token. Deterministic: the same output on every run.
Each line: {"family": ..., "value": ...}."""
import base64, json, os, random

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

# The strict profile (src/privacy/strict.rs): values the reference accepts that the strict table
# refuses, and near-misses both profiles keep. Own seed, so the two files above stay as they are.
# Every value is machine text ([A-Za-z0-9][A-Za-z0-9_.:/@+-]*): ledger text cannot hold anything
# else, so a family that needs other characters cannot leak and has no entry here.
rng = random.Random(20261201)
LOWER = "abcdefghijklmnopqrstuvwxyz"
LETTERS = LOWER + LOWER.upper()
HEX = "0123456789abcdef"
DIGITS = "0123456789"
TOKEN = ALNUM + "_"  # body alphabet with `_` but no `-`, so no body spells the reference's `sk-`
UPPER_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
B64 = ALNUM + "+/"
def b64url(data): return base64.urlsafe_b64encode(data.encode()).decode().rstrip("=")

strict = []
def deny(family, *values):
    for v in values: strict.append({"family": family, "value": v})
def around(v):  # the token alone, after a separator, and before one
    return [v, f"token.{v}", f"id:{v}", f"{v}.json"]

deny("gitlab-token", *around(f"glpat-{rand(20, TOKEN)}"), f"glpat-{rand(27, TOKEN)}.01{rand(7, LOWER + DIGITS)}",
     f"glptt-{rand(40, HEX)}", f"GR1348941{rand(20, TOKEN)}", f"glrt-{rand(20, TOKEN)}", f"gldt-{rand(20, TOKEN)}",
     f"glcbt-{rand(3)}_{rand(20, TOKEN)}", f"glft-{rand(20, TOKEN)}", f"glimt-{rand(25, TOKEN)}",
     f"glagent-{rand(50, TOKEN)}", f"gloas-{rand(64, TOKEN)}", f"glsoat-{rand(20, TOKEN)}", f"glffct-{rand(20, TOKEN)}")
deny("google-api-key", *around(f"AIzaSy{rand(33, TOKEN)}"), f"AIza{rand(35, TOKEN)}", f"https://maps.example.com/js:AIza{rand(35, TOKEN)}")
deny("stripe-key", *around(f"sk_live_{rand(24)}"), f"rk_live_{rand(24)}", f"sk_test_{rand(24)}", f"rk_test_{rand(99)}",
     f"sk_prod_{rand(10)}", f"stripe:rk_live_{rand(32)}")
deny("huggingface-token", *around(f"hf_{rand(34, LETTERS)}"), f"api_org_{rand(34, LETTERS)}", f"hub.hf_{rand(34, LETTERS)}")
deny("slack-app-token", *around(f"xapp-1-A{rand(10, UPPER_ALNUM)}-{rand(13, DIGITS)}-{rand(64, HEX)}"),
     f"XAPP-2-A{rand(8, UPPER_ALNUM)}-{rand(10, DIGITS)}-{rand(32, HEX)}")
def slack_hook(kind="services"): return f"hooks.slack.com/{kind}/T{rand(8, UPPER_ALNUM)}/B{rand(10, UPPER_ALNUM)}/{rand(24)}"
deny("slack-webhook", f"https://{slack_hook()}", slack_hook(), f"http://{slack_hook('workflows')}", f"https://{slack_hook('triggers')}",
     f"notify:https://{slack_hook()}", f"HTTPS://HOOKS.SLACK.COM/services/T{rand(8, UPPER_ALNUM)}/B{rand(8, UPPER_ALNUM)}/{rand(24)}")
for p in ["ABIA", "ACCA", "AGPA", "AIDA", "AROA", "AIPA", "ANPA", "ANVA", "APKA", "A3T" + rand(1, UPPER_ALNUM)]:
    deny("aws-key-id", f"{p}{rand(16, UPPER_ALNUM)}")
deny("aws-key-id", f"role:AROA{rand(16, UPPER_ALNUM)}", f"key.ABIA{rand(16, UPPER_ALNUM)}.json")
def jwt_part(obj): return b64url(json.dumps(obj, separators=(",", ":")))
none = jwt_part({"alg": "none"})
deny("unsigned-jwt", f"{none}.{jwt_part({'sub': rand(8), 'iat': rng.randint(10**9, 2 * 10**9)})}.",
     f"{jwt_part({'alg': 'none', 'typ': 'JWT'})}.{jwt_part({'user': rand(6), 'admin': True})}.",
     f"{jwt_part({'alg': 'HS256'})}.{jwt_part({'sub': rand(12)})}.{rand(10, ALNUM + '_')}",
     f"{none}.e30.", f"session.{none}.{jwt_part({'role': 'admin'})}.",
     f"{jwt_part({'typ': 'JWT', 'alg': 'none'})}.{jwt_part({'scope': 'repo', 'exp': 1893456000})}.{rand(15, ALNUM)}")
deny("base64-jwt", f"ZXlKaGJHY2lPaU{rand(60, ALNUM)}", f"jwt:ZXlKMGVYQWlPaUp{rand(48, ALNUM)}")
deny("this-network-ipv4", "0.0.0.0", "0.0.0.0:8080", "http://0.0.0.0/admin", "tcp://0.0.0.0:5432", "0.1.2.3",
     f"0.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 255)}", "host-0.0.0.0", "http://0.0:80/x", "https://0.0.0.0:443/")
deny("ietf-protocol-ipv4", "192.0.0.192", "http://192.0.0.170/", "192.0.0.8:53")
deny("benchmarking-ipv4", "198.18.0.1", "198.19.255.254:9000", "http://198.18.12.34/x")
deny("cloud-metadata-ipv4", "168.63.129.16", "http://168.63.129.16/machine", "wireserver:168.63.129.16")
deny("unspecified-ipv6", "0::", "0:0:0:0:0:0:0:0", "0000::", "bind:0::")
deny("nat64-private-ipv4", "64:ff9b::a00:1", "64:ff9b::7f00:1", "64:ff9b::c0a8:101", "64:ff9b::a9fe:a9fe",
     "64:ff9b::ac10:1", "64:ff9b::6440:1", "64:ff9b:0:0:0:0:a00:1", "64:ff9b::0:1")
deny("nat64-local-use", "64:ff9b:1::a00:1", "64:ff9b:1:2::1")
deny("6to4-private-ipv4", "2002:a00:1::1", "2002:c0a8:101::", "2002:7f00:1:0:0:0:0:1", "2002:ac10:1::5")
deny("ipv4-embedded-private", "0::ffff:0:a00:1", "0::ffff:0:7f00:1", "0::ffff:0:0", "0:0:0:0:0:ffff:c612:1")
deny("site-local-ipv6", "fec0::1", "fec0:0:0:ffff::1", "feff::a")
deny("loopback-dns-name", "localtest.me", "api.localtest.me:8080", "https://lvh.me/x", "vcap.me", "localhost.direct",
     "app.localhost.direct", "LVH.ME")
deny("wildcard-ip-dns-name", "10-0-0-1.nip.io", "127-0-0-1.sslip.io", "http://192-168-1-1.nip.io/", "x.xip.io")
deny("atlassian-token", f"ATATT3{rand(186, TOKEN)}")
deny("postman-token", f"PMAK-{rand(24, HEX)}-{rand(34, HEX)}")
deny("sourcegraph-token", f"sgp_{rand(16, HEX)}_{rand(40, HEX)}", f"sgp_{rand(40, HEX)}")
deny("harness-token", f"pat.{rand(22, TOKEN)}.{rand(24)}.{rand(20)}")
deny("octopus-deploy-key", f"API-{rand(26, UPPER_ALNUM)}")
deny("readme-token", f"rdme_{rand(70, LOWER + DIGITS)}")
deny("linear-token", f"lin_api_{rand(40)}")
deny("notion-token", f"ntn_{rand(11, DIGITS)}{rand(35)}")
deny("frameio-token", f"fio-u-{rand(64, TOKEN)}")
deny("pypi-token", f"pypi-AgEIcHlwaS5vcmc{rand(60, TOKEN)}")
deny("rubygems-token", f"rubygems_{rand(48, HEX)}")
deny("clojars-token", f"CLOJARS_{rand(60, LOWER + DIGITS)}")
deny("artifactory-token", f"AKCp{rand(69)}", f"cmVmd{rand(59)}")
deny("alibaba-key-id", f"LTAI{rand(20)}")
deny("digitalocean-token", f"dop_v1_{rand(64, HEX)}", f"doo_v1_{rand(64, HEX)}", f"dor_v1_{rand(64, HEX)}")
deny("vault-token", f"hvs.{rand(95, TOKEN)}", f"hvb.{rand(140, TOKEN)}")
deny("terraform-token", f"{rand(14, LOWER + DIGITS)}.atlasv1.{rand(64, TOKEN)}")
deny("databricks-token", f"dapi{rand(32, HEX)}", f"dapi{rand(32, HEX)}-2")
deny("cloudflare-origin-ca-key", f"v1.0-{rand(24, HEX)}-{rand(146, HEX)}")
deny("heroku-token", f"HRKU-AA{rand(58, TOKEN)}")
deny("flyio-token", f"fo1_{rand(43, TOKEN)}", f"fm2_{rand(110, B64)}")
deny("doppler-token", f"dp.pt.{rand(43)}")
deny("pulumi-token", f"pul-{rand(40, HEX)}")
deny("planetscale-token", f"pscale_tkn_{rand(43, TOKEN)}", f"pscale_oauth_{rand(40, TOKEN)}", f"pscale_pw_{rand(43, TOKEN)}")
deny("scalingo-token", f"tk-us-{rand(48, TOKEN)}")
deny("dynatrace-token", f"dt0c01.{rand(24, UPPER_ALNUM)}.{rand(64, UPPER_ALNUM)}")
deny("grafana-token", f"glc_{rand(40, B64)}", f"glsa_{rand(32)}_{rand(8, HEX)}", f"eyJrIjoi{rand(80)}")
deny("new-relic-key", f"NRAK-{rand(27, UPPER_ALNUM)}", f"NRJS-{rand(19, HEX)}", f"NRII-{rand(32, UPPER_ALNUM)}")
deny("sentry-token", f"sntryu_{rand(64, HEX)}", f"sntrys_eyJpYXQiO{rand(60, ALNUM + '+/')}")
deny("infracost-token", f"ico-{rand(32)}")
deny("prefect-token", f"pnu_{rand(36)}")
deny("settlemint-token", f"sm_pat_{rand(16)}", f"sm_aat_{rand(16)}", f"sm_sat_{rand(16)}")
deny("onepassword-secret-key", f"A3-{rand(6, UPPER_ALNUM)}-{rand(11, UPPER_ALNUM)}-{rand(5, UPPER_ALNUM)}-{rand(5, UPPER_ALNUM)}-{rand(5, UPPER_ALNUM)}")
deny("age-secret-key", "AGE-SECRET-KEY-1" + rand(58, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"))
deny("maxmind-license-key", f"{rand(6)}_{rand(29)}_mmk")
deny("adobe-client-secret", f"p8e-{rand(32)}")
deny("square-token", f"EAAA{rand(60, TOKEN)}", f"sq0atp-{rand(22, TOKEN)}", f"sq0csp-{rand(43, TOKEN)}")
deny("shopify-token", f"shpat_{rand(32, HEX)}", f"shpca_{rand(32, HEX)}", f"shppa_{rand(32, HEX)}", f"shpss_{rand(32, HEX)}")
deny("shippo-token", f"shippo_live_{rand(40, HEX)}", f"shippo_test_{rand(40, HEX)}")
deny("duffel-token", f"duffel_test_{rand(43, TOKEN)}")
deny("easypost-token", f"EZAK{rand(54)}", f"EZTK{rand(54)}")
deny("facebook-token", f"EAAC{rand(110)}")
deny("perplexity-key", f"pplx-{rand(48)}")
deny("discord-webhook", f"https://discord.com/api/webhooks/{rand(18, DIGITS)}/{rand(68, TOKEN)}",
     f"discordapp.com/api/webhooks/{rand(19, DIGITS)}/{rand(64, TOKEN)}", f"https://discord.com/api/v10/webhooks/{rand(18, DIGITS)}/{rand(68, TOKEN)}")
deny("discord-bot-token", f"M{rand(23, TOKEN)}.{rand(6, TOKEN)}.{rand(27, TOKEN)}", f"N{rand(23, TOKEN)}.{rand(6, TOKEN)}.{rand(38, TOKEN)}")
deny("telegram-bot-token", f"{rand(10, DIGITS)}:AA{rand(33, TOKEN)}", f"{rand(9, DIGITS)}:AA{rand(33, TOKEN)}", f"telegram:{rand(9, DIGITS)}:AA{rand(33, TOKEN)}")
deny("twilio-key", f"SK{rand(32, HEX)}", f"twilio.SK{rand(32, HEX.upper())}")
deny("sendgrid-key", f"SG.{rand(22, TOKEN)}.{rand(43, TOKEN)}")
deny("sendinblue-key", f"xkeysib-{rand(64, HEX)}-{rand(16)}")
deny("mailchimp-key", f"{rand(32, HEX)}-us{rng.randint(1, 21)}")
# Private hosts behind any scheme: WHATWG leaves the host of a scheme it does not know opaque, so
# the reference never reads `127.1`, `0177.1`, `0x7f.1` or `2130706433` as the address it reaches.
deny("loopback-ipv4", "gopher://127.1:6379/", "gopher://127.1:6379/_INFO", "redis://0x7f.1:6379",
     "smb://2130706433/share", "ldap://0177.1/", "mongodb://0x7f000001:27017/db", "dict://127.0.1:2628/",
     "svn+ssh://017700000001/repo", "xhttp://127.1/", "gopher://127.1./", "job_gopher://127.1/",
     "gopher:///127.1/")
deny("private-ipv4", "dict://10.1:2628/d:x", "ldap://172.16.1/", "redis://192.168.1:6379/0", "smb://0xc0.0xa8.1/share",
     "mongodb://0300.0250.1/db", "gopher://167772161/", "unknown-scheme://10.0.1/")
deny("shared-address-ipv4", "redis://100.64.1:6379/", "foo://1681915905/")
deny("link-local-ipv4", "mongodb://0xa9fea9fe/", "gopher://169.254.43518/latest")
deny("this-network-ipv4", "gopher://0/", "redis://0.0:6379", "ldap://0x0/", "ws://0.0.0.0:8080/socket", "ftp://0.0.0.0:21/")
deny("benchmarking-ipv4", "dict://198.18.1/", "ftp://198.18.1:99999/")
deny("ietf-protocol-ipv4", "smb://192.0.0xc0/", "ws://192.0.0.192/")
deny("cloud-metadata-ipv4", "redis://0xa83f8110/")
deny("loopback-dns-name", "gopher://api.localtest.me:70/")
deny("wildcard-ip-dns-name", "redis://10-0-0-1.nip.io:6379/")

near = []
def keep_near(family, *values):
    for v in values: near.append({"family": family, "value": v})
keep_near("public-host", "github.com", "api.github.com", "hooks.example.com", "discord.com", "hooks.slack.com",
          "huggingface.co", "registry.npmjs.org", "8.8.8.8", "1.1.1.1", "9.9.9.9", "192.0.2.1", "198.51.100.7",
          "203.0.113.9", "198.20.0.1", "192.0.1.1", "1.0.0.0", "2001:db8::1", "2606:4700:4700::1111",
          "64:ff9b::808:808", "2002:808:808::1", "fe00::1", "https://github.com/openclaw/clawsweeper", "example.me",
          "snip.io", "nip.io.example.com", "lvh.me.example.com", "evil-lvh.me", "localtest")
keep_near("version", "0.1.2", "0.0.1", "v0.1.2.3", "1.0.0.0.1", "10.0.0", "2.0.0-rc.1", "v10.4.1", "1.84.0",
          "2026.11.30", "0.9.1-alpha.3", "v3.2.1+build.77")
keep_near("model", "gpt-4o-mini", "gpt-4.1", "o3-mini", "claude-3-5-sonnet-20241022", "claude-sonnet-4-5",
          "gemini-1.5-flash", "llama-3.1-8b-instruct", "mistral-large-latest", "text-embedding-3-small",
          "deepseek-r1", "qwen2.5-coder-32b", "hf-internal-testing")
keep_near("hex-id", rand(40, HEX), rand(64, HEX), rand(32, HEX), rand(24, HEX), rand(16, HEX),
          "7994874d-b71a-4e00-901a-564f98943ae6", f"sha256:{rand(64, HEX)}", f"dapi{rand(31, HEX)}",
          f"SK{rand(31, HEX)}", f"{rand(32, HEX)}-usa")
keep_near("repository", "openclaw/clawsweeper", "huggingface/transformers", "stripe/stripe-node",
          "gitlab-org/gitlab-runner", "slackapi/bolt-js", "scikit-learn/scikit-learn", "aws/aws-cli")
keep_near("relative-path", "records/openclaw/items/42.md", "results/review/42.json", "artifacts/glpat-docs/readme.md",
          "logs/hf_cache/run-1.log")
keep_near("word", "token_count", "tokens_used", "sk-learn", "task-runner", "stripe_live_mode", "live_tokens",
          "api_org", "api_organization_id", "hooks", "webhooks", "xapp-store", "glpat", "glpat-short",
          "AIzaSyShort", "hf_cache", "hf_hub_offline", "sk_live_short", "rk_test", "secret_scanning", "dapper",
          "pull-request-42", "PMAK-docs", "API-VERSION-2", "ACCA-ledger", "AGPA", "ABIAS", "eyJhbGciOiJIUzI1NiJ9",
          "eyJabc.eyJdef.ghi", "SG.short", "SKU-12345", "NRAK-short", "ntn_123", "telegram:12345",
          "M.short.token", "rdme_intro", "pnu_x", "ico-icon", "EAAA", "fec", "fe80-notes", "review.item")
keep_near("short-token", f"glpat-{rand(19, TOKEN)}", f"AIza{rand(34, TOKEN)}", f"hf_{rand(33, LETTERS)}",
          f"hf_{rand(30, LETTERS)}1234", f"ABIA{rand(15, UPPER_ALNUM)}", f"ACCA{rand(17, UPPER_ALNUM)}",
          f"AKIA{rand(15, UPPER_ALNUM)}", f"sk_live_{rand(9)}", f"xapp-{rand(10)}", f"dop_v1_{rand(63, HEX)}",
          f"shpat_{rand(31, HEX)}", f"SK{rand(33, HEX)}")
keep_near("id", "13550726447", "run-42", "review-shard-0", "cluster:dup-17", "snap-2026-01-15", "queue_item:7",
          "workflow.attempt:7cd3863d8426b22d483336d35d0e94139e5c7288865a96ea469b3c644859efd2",
          "clippy::needless_borrow", "std::net::Ipv6Addr", "2026-01-15T10:00:00Z", "10:00:00", "a::b", "dead::beef")
keep_near("public-host", "gopher://8.8.8.8/", "gopher://8.8/", "redis://134744072:6379", "ldap://ldap.example.com/",
          "smb://files.example.org/share", "mongodb://db.example.com:27017/app", "dict://dict.org:2628/",
          "ftp://ftp.gnu.org/gnu/", "ws://echo.example.com/socket", "s3://bucket/key", "git+ssh://github.com/o/r",
          "gopher://0x8.8.8.8/", "redis://1.1/", "unknown://198.20.0.1/", "gopher://192.0.2.1/", "ldap://0x7e.1/")

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "privacy")
os.makedirs(here, exist_ok=True)
for name, rows in [("rejected.jsonl", rejected), ("accepted.jsonl", accepted),
                   ("strict-rejected.jsonl", strict), ("near-miss.jsonl", near)]:
    with open(os.path.join(here, name), "w") as f:
        for r in rows: f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
print(f"rejected: {len(rejected)}, accepted: {len(accepted)}, strict-rejected: {len(strict)}, near-miss: {len(near)}")
