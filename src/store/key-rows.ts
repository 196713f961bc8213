import { z } from "zod";
import { hashSecret, keyPrefix, newGatewayKey, newId } from "./secrets.js";
import type { KeyKind, KeyRow, KeyWithAccount } from "./types.js";

/** The most characters a key's label may have. */
export const keyLabelMaxChars = 100;

/** Characters as a person counts them (code points): an emoji is one, not its two UTF-16 units. */
export function characterCount(text: string): number {
  let count = 0;
  for (const _ of text) count++;
  return count;
}

/** Whether a label is within the most characters any label may have (a key's, a BYOK key's). */
export function labelFits(label: string): boolean {
  return characterCount(label) <= keyLabelMaxChars;
}

const labelSize = `must be 1 to ${keyLabelMaxChars} characters`;

/**
 * A key's label, wherever a key is made: the API, the dashboard, the admin API, `keys create`.
 * Counted here rather than by zod's `max`, whose unit (UTF-16 units or code points) depends on
 * its version, so that the CLI and every gateway agree on what fits.
 */
export const keyLabel = z.string().trim().min(1, labelSize).refine(labelFits, labelSize);

/**
 * A BYOK key's label, which may be left out (the provider's id stands in): counted as `keyLabel`
 * counts, and refused rather than cut, since a cut in UTF-16 units can split an emoji in two.
 */
export const byokLabel = z
  .string()
  .trim()
  .refine(labelFits, `must be at most ${keyLabelMaxChars} characters`);

/**
 * A key's kind as people call it. A key a CLI login minted (`gateway keys create`, `gateway mcp`)
 * is stored as a standard or shared key with its login key as parent: it is that login's per-tool
 * key, which `/api/keys` lists and `gateway keys revoke` revokes.
 */
export function shownKeyKind(key: { kind: string; parent_key_id: string | null }): string {
  if (key.parent_key_id === null) return key.kind;
  return key.kind === "shared" ? "per-tool, shared" : "per-tool";
}

/** A key row as inserted: the value itself is never stored, only its hash and prefix. */
export interface NewKeyRow {
  id: string;
  accountId: string;
  hash: string;
  prefix: string;
  label: string;
  kind: KeyKind;
  parentKeyId: string | null;
  createdAt: number;
}

/** A new key of `input`'s: its only plaintext copy, and the row that keeps its hash. */
export function mintKeyRow(input: {
  accountId: string;
  label: string;
  kind: KeyKind;
  parentKeyId?: string | null;
  now?: number;
}): { value: string; row: NewKeyRow } {
  const value = newGatewayKey();
  return {
    value,
    row: {
      id: newId("key"),
      accountId: input.accountId,
      hash: hashSecret(value),
      prefix: keyPrefix(value),
      label: input.label,
      kind: input.kind,
      parentKeyId: input.parentKeyId ?? null,
      createdAt: input.now ?? Date.now(),
    },
  };
}

/**
 * What authentication gets for a key row (a stored row's hash left out). Field by field: on Node
 * 20 a spread with a field added takes V8's slow path, and this runs on every request.
 */
export function keyWithAccount(
  key: KeyRow,
  accountStatus: KeyWithAccount["account_status"],
): KeyWithAccount {
  return {
    id: key.id,
    account_id: key.account_id,
    prefix: key.prefix,
    label: key.label,
    kind: key.kind,
    parent_key_id: key.parent_key_id,
    created_at: key.created_at,
    last_used_at: key.last_used_at,
    revoked_at: key.revoked_at,
    account_status: accountStatus,
  };
}

/** What other repositories may do to key rows, inside their own transactions. */
