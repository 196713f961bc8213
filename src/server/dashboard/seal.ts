import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";

/**
 * Holds a secret in the database only in a form this process can open: AES-256-GCM under a key
 * that lives in memory. A copied database file, or a restarted gateway, cannot recover it; the
 * device flow then ends as `expired_token`, which is the safe outcome.
 */
export class ProcessSeal {
  private readonly key = randomBytes(32);

  seal(plaintext: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", this.key, iv);
    const body = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
    return [iv, cipher.getAuthTag(), body].map((b) => b.toString("base64url")).join(".");
  }

  /** Undefined when the value was sealed by another process (or tampered with). */
  open(sealed: string): string | undefined {
    const [iv, tag, body] = sealed.split(".").map((part) => Buffer.from(part, "base64url"));
    if (!iv || !tag || !body) return undefined;
    try {
      const decipher = createDecipheriv("aes-256-gcm", this.key, iv);
      decipher.setAuthTag(tag);
      return Buffer.concat([decipher.update(body), decipher.final()]).toString("utf8");
    } catch {
      return undefined;
    }
  }
}
