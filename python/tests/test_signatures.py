"""The model-signature oracle: model-signing 1.1.1 (the OpenSSF Model Signing library) verifies
every vector of `fixtures/signatures/` (each signed directory, key, certificate chain or
keyless Sigstore, mutated as `truth.json` says:
a changed byte, an added or removed file, no signature, the wrong key or CA, a tampered
bundle) and `tensorplay audit --require-signature` must agree: it passes exactly the vectors
model_signing verifies, failing the others with the code `truth.json` names. The library's
verdict must still be the one recorded when the fixtures were made.

model-signing 1.1.1 cannot verify a `shards` signature (it reads `shard_size` back as a
float): for those vectors, marked `oracle_cannot_verify`, the library must still fail that
way and tensorplay is held to the recorded code instead.
"""

import base64
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, command

model_signing = pytest.importorskip("model_signing")

DIR = FIXTURES / "signatures"
TRUTH = json.loads((DIR / "truth.json").read_text())


def tampered_bundle(text):
    """make_signatures.py's tamper: the statement's first digest changed, the signature kept."""
    bundle = json.loads(text)
    payload = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    digest = payload["predicate"]["resources"][0]["digest"]
    payload["predicate"]["resources"][0]["digest"] = ("0" if digest[0] != "0" else "1") + digest[1:]
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    return json.dumps(bundle)


def apply(case, model):
    for step in case.get("mutate", []):
        target = model / step["path"]
        if step["op"] == "flip-byte":
            data = bytearray(target.read_bytes())
            data[step["offset"]] ^= 0x01
            target.write_bytes(bytes(data))
        elif step["op"] == "add":
            target.write_text(step["text"])
        elif step["op"] == "remove":
            target.unlink()
        elif step["op"] == "tamper-bundle":
            target.write_text(tampered_bundle(target.read_text()))
        else:
            raise ValueError(step["op"])


def trust_config(directory):
    """The production Sigstore trust root sigstore-python ships, as a client trust config:
    model_signing verifies keyless signatures with it offline, with no TUF refresh."""
    import sigstore

    store = pathlib.Path(sigstore.__file__).parent / "_store" / "https%3A%2F%2Ftuf-repo-cdn.sigstore.dev"
    config = {
        "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
        "trustedRoot": json.loads((store / "trusted_root.json").read_text()),
        "signingConfig": json.loads((store / "signing_config.v0.2.json").read_text()),
    }
    path = directory / "trust_config.json"
    path.write_text(json.dumps(config))
    return path


def oracle(case, model):
    """model_signing's verdict: "" when it verifies, else the error. Keyless through its CLI,
    which leaves the signature file out of the manifest as tensorplay does; the others
    through its API, which takes the hashing method from the signed manifest."""
    if not (model / "model.sig").exists():
        return "no signature"
    trust = case["trust"]
    if "identity" in trust:
        done = subprocess.run(
            [sys.executable, "-m", "model_signing", "verify", "sigstore", model,
             "--signature", model / "model.sig", "--identity", trust["identity"],
             "--identity_provider", trust["issuer"],
             "--trust_config", trust_config(model.parent)],
            capture_output=True, text=True,
        )
        return "" if done.returncode == 0 else (done.stdout + done.stderr).strip() or "failed"
    config = model_signing.verifying.Config()
    if "public_key" in trust:
        config = config.use_elliptic_key_verifier(public_key=DIR / trust["public_key"])
    else:
        config = config.use_certificate_verifier(certificate_chain=[DIR / trust["certificate_chain"]])
    try:
        config.verify(model, model / "model.sig")
    except Exception as e:  # noqa: BLE001: any refusal is the verdict
        return f"{type(e).__name__}: {e}"
    return ""


def tensorplay(case, model):
    """The exit code and the provenance findings' codes of `audit --require-signature`."""
    trust = case["trust"]
    if "identity" in trust:
        flags = ["--identity", trust["identity"], "--issuer", trust["issuer"]]
    elif "public_key" in trust:
        flags = ["--public-key", DIR / trust["public_key"]]
    else:
        flags = ["--certificate-chain", DIR / trust["certificate_chain"]]
    done = command("audit", "--format", "json", "--require-signature", *flags, model)
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    codes = {
        f["code"]
        for file in report["files"]
        for f in file["findings"]
        if f["code"].startswith("TP8")
    }
    return done.returncode, codes


@pytest.mark.parametrize("case", TRUTH["cases"], ids=[c["name"] for c in TRUTH["cases"]])
def test_tensorplay_and_model_signing_agree(case, tmp_path):
    model = tmp_path / case["vector"]
    shutil.copytree(DIR / case["vector"], model)
    apply(case, model)
    error = oracle(case, model)
    verified = not error
    assert verified == case["model_signing_verified"], error
    code, codes = tensorplay(case, model)
    assert codes == {case["code"]}
    if "oracle_cannot_verify" in case:
        assert "float" in error, error
        return
    assert (code == 0) == verified, (codes, error)
    assert ("TP805" in codes) == verified


def test_the_truth_covers_every_method_and_failure():
    names = {c["name"] for c in TRUTH["cases"]}
    for vector in ["key", "key-shards", "key-blake3", "cert", "keyless-v1.0.0", "keyless-v1.1.0"]:
        for kind in ["good", "changed-byte", "added-file", "removed-file", "missing-signature", "tampered-bundle"]:
            assert f"{vector}/{kind}" in names
    assert TRUTH["model_signing"] == model_signing_version()


def model_signing_version():
    from importlib.metadata import version

    return version("model-signing")
