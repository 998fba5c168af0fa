"""The test certificates of the CrabFleet stand-ins (scripts/crash-projection.py,
scripts/e2e-projection.py): a CA and a leaf for 127.0.0.1, made by `openssl` in a directory of
the run, the CA trusted by the binary through SSL_CERT_FILE."""
import os
import subprocess


def certificates(directory, name):
    """Writes a CA named `name` and a leaf for IP 127.0.0.1 under `directory` (created); returns
    the paths of the CA, the leaf and the leaf's key."""
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    os.makedirs(directory)
    ca, ca_key = os.path.join(directory, "ca.pem"), os.path.join(directory, "ca.key")
    leaf, leaf_key, csr = (os.path.join(directory, n) for n in ("leaf.pem", "leaf.key", "leaf.csr"))
    ext = os.path.join(directory, "leaf.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", leaf_key, "-out", csr, "-subj", "/CN=127.0.0.1")
    run("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-out", leaf, "-days", "2", "-extfile", ext)
    return ca, leaf, leaf_key
