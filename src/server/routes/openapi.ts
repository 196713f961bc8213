import { z } from "zod";
import { sessionCookieName } from "../auth/owner-session.js";
import type { Handler } from "../http/context.js";
import type { Access, Route, RouteErrorStyle } from "../http/route-row.js";

/**
 * GET /openapi.json (public): the route table as an OpenAPI 3.1 document, so clients and docs can
 * be generated. Paths, methods and who may call each come from the table; a request body is its
 * zod schema (`Route.body`) through zod's own JSON Schema output, so the document and the checks
 * a request meets are the same definition. Built once, on the first request.
 */
export function openApiHandler(routes: () => readonly Route[]): Handler {
  let document: Promise<object> | undefined;
  return async (c) => {
    document ??= openApiDocument(routes());
    return c.json(await document);
  };
}

const security: Record<Exclude<Access, "public">, object[]> = {
  key: [{ bearer: [] }, { apiKey: [] }],
  "any-key": [{ bearer: [] }, { apiKey: [] }],
  login: [{ bearer: [] }],
  admin: [{ bearer: [] }],
  owner: [{ ownerSession: [] }],
  "owner-page": [{ ownerSession: [] }],
};

const errorSchemas = {
  ChatError: {
    type: "object",
    required: ["error"],
    properties: {
      error: {
        type: "object",
        required: ["message", "type", "code"],
        properties: {
          message: { type: "string" },
          type: { type: "string" },
          param: { type: "null" },
          code: { type: "string" },
        },
      },
    },
  },
  MessagesError: {
    type: "object",
    required: ["type", "error"],
    properties: {
      type: { const: "error" },
      error: {
        type: "object",
        required: ["type", "message"],
        properties: { type: { type: "string" }, message: { type: "string" } },
      },
    },
  },
  JsonRpcError: {
    type: "object",
    required: ["jsonrpc", "error", "id"],
    properties: {
      jsonrpc: { const: "2.0" },
      error: {
        type: "object",
        required: ["code", "message"],
        properties: { code: { type: "integer" }, message: { type: "string" } },
      },
      id: { type: "null" },
    },
  },
};

/** The schema of each route error style's body (`client` answers the chat style unless asked). */
const errorSchemaOf: Record<RouteErrorStyle, keyof typeof errorSchemas> = {
  chat: "ChatError",
  messages: "MessagesError",
  jsonrpc: "JsonRpcError",
  client: "ChatError",
};

export async function openApiDocument(routes: readonly Route[]): Promise<object> {
  const paths: Record<string, Record<string, object>> = {};
  for (const route of routes) {
    // Preflights, the HTML pages and this document itself are not an API to generate a client for.
    if (route.method === "OPTIONS" || route.path.includes("*")) continue;
    if (route.access === "owner-page" || route.path === "/" || route.path === "/openapi.json")
      continue;
    if (route.path.startsWith("/dashboard")) continue;
    const { path, parameters } = openApiPath(route.path);
    if (route.query) parameters.push(...queryParameters(jsonSchema(await route.query())));
    const body = route.body ? jsonSchema(await route.body()) : undefined;
    const errorRef = `#/components/schemas/${errorSchemaOf[route.errors]}`;
    const responses: Record<string, object> = {
      "200": { description: "The answer (JSON; an event stream when the body asks for one)." },
      default: {
        description: "An error in the route's style",
        content: { "application/json": { schema: { $ref: errorRef } } },
      },
    };
    if (route.access !== "public") {
      responses["401"] = {
        description: "Missing or wrong key (plain text)",
        content: { "text/plain": { schema: { type: "string" } } },
      };
    }
    paths[path] ??= {};
    paths[path][route.method.toLowerCase()] = {
      operationId: `${route.method.toLowerCase()}${path.replace(/[^A-Za-z0-9]+(.)?/g, (_, ch: string | undefined) => (ch ? ch.toUpperCase() : ""))}`,
      ...(route.access === "public" ? { security: [] } : { security: security[route.access] }),
      ...(parameters.length > 0 ? { parameters } : {}),
      ...(body
        ? { requestBody: { required: true, content: { "application/json": { schema: body } } } }
        : {}),
      responses,
    };
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "Model Gateway",
      version: "0.1.0",
      description: "One kn- key for every model: chat completions, messages and responses styles.",
    },
    paths,
    components: {
      securitySchemes: {
        bearer: { type: "http", scheme: "bearer", description: "A gateway key (kn-...)" },
        apiKey: { type: "apiKey", in: "header", name: "x-api-key" },
        ownerSession: { type: "apiKey", in: "cookie", name: sessionCookieName },
      },
      schemas: errorSchemas,
    },
  };
}

/** Hono's `/v1/models/:id{.+}` as OpenAPI's `/v1/models/{id}`, with its path parameters. */
function openApiPath(path: string): { path: string; parameters: object[] } {
  const parameters: object[] = [];
  const converted = path.replace(/:([A-Za-z]+)(\{[^}]*\})?/g, (_, name: string) => {
    parameters.push({ name, in: "path", required: true, schema: { type: "string" } });
    return `{${name}}`;
  });
  return { path: converted, parameters };
}

/** An object schema's properties as OpenAPI's query parameters, each optional unless required. */
function queryParameters(schema: {
  properties?: Record<string, object>;
  required?: string[];
}): object[] {
  return Object.entries(schema.properties ?? {}).map(([name, property]) => ({
    name,
    in: "query",
    required: schema.required?.includes(name) ?? false,
    schema: property,
  }));
}

function jsonSchema(schema: z.ZodType): object {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, { io: "input", unrepresentable: "any" });
  return rest;
}
