import type { Context } from "hono";
import { z } from "zod";
import type { PageQuery } from "../../store/types.js";
import { badRequest } from "../errors.js";

/**
 * The query of a list paged as OpenAI pages its lists: `limit` (1 to `max`, default `byDefault`),
 * `order` (`asc` or `desc`, default `desc`) and `after` (the id of the row the page starts after,
 * in that order). `schema` is what `GET /openapi.json` describes; `parse` answers a bad value with
 * a 400 naming the parameter.
 */
export function listQuery(max: number, byDefault: number) {
  const schema = z.looseObject({
    limit: z.coerce.number().int().min(1).max(max).default(byDefault),
    order: z.enum(["asc", "desc"]).default("desc"),
    after: z.string().min(1).optional(),
  });
  const parse = (c: Context): PageQuery => parseQuery(schema, c);
  return { schema, parse };
}

/** The request's query as `schema` reads it; a bad value is a 400 naming the parameter. */
export function parseQuery<T extends z.ZodType>(schema: T, c: Context): z.infer<T> {
  const parsed = schema.safeParse(c.req.query());
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw badRequest(`Invalid query parameter ${issue.path.join(".")}: ${issue.message}`);
  }
  return parsed.data;
}

/** A page as OpenAI lists one: `first_id` and `last_id` are what `after` takes. */
export function listPage<T>(rows: T[], idOf: (row: T) => string, hasMore: boolean) {
  return {
    object: "list" as const,
    data: rows,
    first_id: rows.length > 0 ? idOf(rows[0]) : null,
    last_id: rows.length > 0 ? idOf(rows[rows.length - 1]) : null,
    has_more: hasMore,
  };
}
