import { z } from "zod";
import { keyLabel } from "../../store/key-rows.js";
import type { KeyRow } from "../../store/types.js";
import type { Services } from "../compose/services.js";
import { GatewayError } from "../errors.js";
import { readJson } from "../http/body.js";
import type { Handler } from "../http/context.js";

/**
 * Per-tool keys, minted from a login key (bearer) or from the owner's dashboard session:
 *   POST   /api/keys            {label, shared?} -> 201 {id, key, label, kind, parent_key_id, created_at}
 *   GET    /api/keys                              -> {data: [key view]} (the account's per-tool keys)
 *   DELETE /api/keys/:idOrLabel                   -> {id, revoked: true, already_revoked, revoked_at}
 *   GET    /api/auth/whoami                       -> {account_id, key_id, kind, parent_key_id, label, prefix}
 *   POST   /api/auth/logout                       -> {id, revoked: true} (the presenting login key)
 *   /api/dashboard/keys[...]                      -> the same for the owner session (cookie + x-csrf-token)
 * Times are epoch milliseconds, like the rest of the /api surface. A per-tool key is stored as a
 * standard or shared key: `parent_key_id`, the login key that minted it (null on any other key),
 * is what tells it apart.
 */

export const createKeyBody = z.object({
  label: keyLabel,
  shared: z.boolean().optional(),
});

export interface KeyView {
  id: string;
  label: string;
  kind: KeyRow["kind"];
  parent_key_id: string | null;
  prefix: string;
  created_at: number;
  last_used_at: number | null;
  revoked_at: number | null;
}

/** Everything about a key that may be shown after creation: never its value or hash. */
export function keyView(key: KeyRow): KeyView {
  return {
    id: key.id,
    label: key.label,
    kind: key.kind,
    parent_key_id: key.parent_key_id,
    prefix: key.prefix,
    created_at: key.created_at,
    last_used_at: key.last_used_at,
    revoked_at: key.revoked_at,
  };
}

/** The one answer that carries a key's value. */
export async function mintKey(
  services: Pick<Services, "limits" | "options" | "store">,
  input: {
    accountId: string;
    parentKeyId: string | null;
    label: string;
    shared: boolean;
    limiterId: string;
  },
) {
  const now = services.options.now();
  await services.limits.takeKeyCreation(input.limiterId, now);
  const { key, value } = await services.store.createKey({
    accountId: input.accountId,
    label: input.label,
    kind: input.shared ? "shared" : "standard",
    parentKeyId: input.parentKeyId,
    now,
  });
  return {
    id: key.id,
    key: value,
    label: key.label,
    kind: key.kind,
    parent_key_id: key.parent_key_id,
    created_at: key.created_at,
  };
}

/**
 * By id first; else by label among the active keys, which must then be unambiguous; else the
 * latest revoked key of that label, so revoking twice says so instead of "no such key".
 */
function findKeyToRevoke(candidates: KeyRow[], idOrLabel: string): KeyRow {
  const byId = candidates.find((k) => k.id === idOrLabel);
  if (byId) return byId;
  const labelled = candidates.filter((k) => k.label === idOrLabel);
  const byLabel = labelled.filter((k) => k.revoked_at === null);
  if (byLabel.length === 1) return byLabel[0];
  if (byLabel.length > 1) {
    throw new GatewayError(
      400,
      "bad_request",
      `${byLabel.length} active keys are labelled "${idOrLabel}" (${byLabel.map((k) => k.id).join(", ")}); revoke one by its id.`,
    );
  }
  if (labelled.length > 0) {
    return labelled.reduce((a, b) => ((b.revoked_at ?? 0) > (a.revoked_at ?? 0) ? b : a));
  }
  throw new GatewayError(
    404,
    "not_found",
    `No key with id or label "${idOrLabel}" among your keys.`,
  );
}

/** Revoking a revoked key changes nothing and says so (`already_revoked`, with the first time). */
async function revoke(services: Pick<Services, "options" | "store">, key: KeyRow) {
  if (key.revoked_at !== null)
    return { id: key.id, revoked: true, already_revoked: true, revoked_at: key.revoked_at };
  const now = services.options.now();
  await services.store.revokeKey(key.id, now);
  return { id: key.id, revoked: true, already_revoked: false, revoked_at: now };
}

/** Per-tool keys, for a login key (access `login`), and who any key is (access `any-key`). */
export function toolKeyHandlers(services: Services) {
  return {
    create: (async (c) => {
      const login = c.get("auth").key;
      const body = await readJson(c, createKeyBody);
      const created = await mintKey(services, {
        accountId: login.account_id,
        parentKeyId: login.id,
        label: body.label,
        shared: body.shared ?? false,
        limiterId: login.id,
      });
      return c.json(created, 201, { "cache-control": "no-store" });
    }) satisfies Handler,

    // Every per-tool key of the account, whichever login key minted it: a login that replaced
    // another (a re-login, a second machine) still sees and revokes the keys made before it. The
    // account's other keys (the dashboard's, the config's, the login keys) are not the CLI's.
    list: (async (c) =>
      c.json({
        data: (await services.store.listToolKeys(c.get("auth").key.account_id)).map(keyView),
      })) satisfies Handler,

    revoke: (async (c) => {
      const toolKeys = await services.store.listToolKeys(c.get("auth").key.account_id);
      return c.json(
        await revoke(services, findKeyToRevoke(toolKeys, c.req.param("idOrLabel") ?? "")),
      );
    }) satisfies Handler,

    // Any kind of key may ask who it is: `gateway whoami` also runs with GATEWAY_API_KEY set to a tool key.
    whoami: ((c) => {
      const { key } = c.get("auth");
      return c.json({
        account_id: key.account_id,
        key_id: key.id,
        kind: key.kind,
        parent_key_id: key.parent_key_id,
        label: key.label,
        prefix: key.prefix,
      });
    }) satisfies Handler,

    logout: (async (c) => c.json(await revoke(services, c.get("auth").key))) satisfies Handler,
  };
}

/** The owner-session twin of /api/keys (access `owner`): every key of the account. */
export function dashboardKeyHandlers(services: Services) {
  return {
    list: (async (c) =>
      c.json({
        data: (await services.store.listKeys(c.get("owner").accountId)).map(keyView),
      })) satisfies Handler,

    create: (async (c) => {
      const owner = c.get("owner");
      const body = await readJson(c, createKeyBody);
      const created = await mintKey(services, {
        accountId: owner.accountId,
        parentKeyId: null,
        label: body.label,
        shared: body.shared ?? false,
        limiterId: `session:${owner.id}`,
      });
      return c.json(created, 201, { "cache-control": "no-store" });
    }) satisfies Handler,

    revoke: (async (c) => {
      const keys = await services.store.listKeys(c.get("owner").accountId);
      return c.json(await revoke(services, findKeyToRevoke(keys, c.req.param("idOrLabel") ?? "")));
    }) satisfies Handler,
  };
}
