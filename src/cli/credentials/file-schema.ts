import { z } from "zod";

/**
 * The credentials file's shape. Apart from file-store.ts, and loaded only when the file is read:
 * zod's import is about half of a short command's CPU.
 */

const storedLogin = z.object({
  key: z.string().min(1),
  baseUrl: z.string(),
  keyId: z.string(),
  accountId: z.string(),
  savedAt: z.string(),
});
export const credentialsFile = z.object({
  version: z.literal(1),
  profiles: z.record(z.string(), storedLogin),
});
export type CredentialsFile = z.infer<typeof credentialsFile>;
