import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Whether `openssl` is on the PATH to make a test certificate (tests of TLS skip, saying so, without it). */
export const hasOpenssl = spawnSync("openssl", ["version"], { encoding: "utf8" }).status === 0;

/**
 * A self-signed certificate for 127.0.0.1 and localhost, valid for a day: its own CA, so a client
 * trusts it when given `cert` as its CA (or NODE_EXTRA_CA_CERTS naming a file of it).
 */
export function selfSignedCertificate(): { key: string; cert: string } {
  const dir = mkdtempSync(join(tmpdir(), "test-tls-"));
  try {
    const made = spawnSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-addext",
        "subjectAltName=IP:127.0.0.1,DNS:localhost",
        "-days",
        "1",
        "-keyout",
        join(dir, "k"),
        "-out",
        join(dir, "c"),
      ],
      { encoding: "utf8", timeout: 10_000 },
    );
    if (made.status !== 0) throw new Error(`openssl req failed: ${made.stderr}`);
    return {
      key: readFileSync(join(dir, "k"), "utf8"),
      cert: readFileSync(join(dir, "c"), "utf8"),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
