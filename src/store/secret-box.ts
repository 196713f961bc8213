import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";

/** The environment variable that holds the key sealing BYOK credentials (base64, 32 bytes). */
export const secretKeyEnv = "GATEWAY_SECRET_KEY";
/** During `gateway secrets rotate` with the key in the environment: the key to rotate to. */
export const newSecretKeyEnv = "GATEWAY_NEW_SECRET_KEY";

/** A key that is missing, malformed or does not open this database: the operator must act. */
export class SecretKeyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SecretKeyError";
  }
}

const checkPlaintext = "model-gateway secret key check";
const checkContext = "secret_key_check";

/**
 * AES-256-GCM under a key kept apart from the database, a fresh IV per value. Each value is bound
 * to its row (the additional data), so a sealed value copied onto another row does not open.
 */
export class SecretBox {
  private constructor(private readonly key: Buffer) {}

  static random(): SecretBox {
    return new SecretBox(randomBytes(32));
  }

  /** `text` is base64 of 32 bytes; `where` names its source in the error. */
  static parse(text: string, where: string): SecretBox {
    const key = Buffer.from(text.trim(), "base64");
    if (key.length !== 32) {
      throw new SecretKeyError(
        `${where} must be 32 bytes in base64 (make one with: openssl rand -base64 32)`,
      );
    }
    return new SecretBox(key);
  }

  /** The key as it is written to a key file or an environment variable. */
  encoded(): string {
    return this.key.toString("base64");
  }

  seal(plaintext: string, context: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", this.key, iv);
    cipher.setAAD(Buffer.from(context));
    const body = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
    return `v1.${[iv, cipher.getAuthTag(), body].map((b) => b.toString("base64url")).join(".")}`;
  }

  /** Undefined when this key did not seal the value for this context, or it was altered. */
  open(sealed: string, context: string): string | undefined {
    const [version, ...parts] = sealed.split(".");
    const [iv, tag, body] = parts.map((part) => Buffer.from(part, "base64url"));
    if (version !== "v1" || !iv || !tag || !body) return undefined;
    try {
      const decipher = createDecipheriv("aes-256-gcm", this.key, iv);
      decipher.setAAD(Buffer.from(context));
      decipher.setAuthTag(tag);
      return Buffer.concat([decipher.update(body), decipher.final()]).toString("utf8");
    } catch {
      return undefined;
    }
  }

  /** A value only this key opens, kept in the database to recognise the right key at start. */
  checkValue(): string {
    return this.seal(checkPlaintext, checkContext);
  }

  opensCheck(check: string): boolean {
    return this.open(check, checkContext) === checkPlaintext;
  }
}

/** The additional data a BYOK credential is sealed with: its row. */
export const byokContext = (id: string) => `byok_credentials:${id}`;

/** The additional data a provider's sealed base URL is sealed with: its row. */
export const providerUrlContext = (id: string) => `providers:${id}`;
