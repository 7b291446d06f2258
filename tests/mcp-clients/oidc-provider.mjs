// A real OpenID provider for the cluster tests: the certified `oidc-provider`
// package on loopback, issuing JWT access tokens for the resource a client
// names (RFC 8707), with open dynamic client registration and PKCE. Sign-in
// and consent are scripted: the interaction page logs in the account named
// by `login_hint` (default "alice") and grants what was asked, so a client's
// whole authorization-code flow can run without a person.
// Usage: node oidc-provider.mjs [PORT]; prints {"issuer": ...} once listening.
import crypto from "node:crypto";
import http from "node:http";
import Provider from "oidc-provider";

const port = Number(process.argv[2] ?? 0);
const server = http.createServer();
await new Promise((resolve) => server.listen(port, "127.0.0.1", resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const { privateKey } = crypto.generateKeyPairSync("rsa", { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: "jwk" }), kid: crypto.randomUUID(), alg: "RS256", use: "sig" };

const provider = new Provider(issuer, {
  jwks: { keys: [signingKey] },
  cookies: { keys: [crypto.randomBytes(32).toString("hex")] },
  // The resource scopes too: clients register with the scopes they will ask for.
  scopes: ["openid", "offline_access", ...(process.env.OIDC_RESOURCE_SCOPES ?? "mining").split(" ")],
  findAccount: async (_ctx, sub) => ({ accountId: sub, claims: async () => ({ sub, email: `${sub}@example.com` }) }),
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (_ctx, _client, oneOf) => oneOf,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, resource) => ({
        scope: process.env.OIDC_RESOURCE_SCOPES ?? "mining",
        audience: resource,
        accessTokenFormat: "jwt",
        accessTokenTTL: 600,
        jwt: { sign: { alg: "RS256" } },
      }),
    },
  },
});
provider.proxy = false;

// The scripted person: log in as login_hint, then consent to everything asked.
async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params, session, grantId } = details;
  if (process.env.OIDC_DEBUG) console.error(JSON.stringify({ prompt, params }));
  if (prompt.name === "login") {
    const accountId = params.login_hint || "alice";
    return provider.interactionFinished(req, res, { login: { accountId } }, { mergeWithLastSubmission: false });
  }
  const grant = grantId
    ? await provider.Grant.find(grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  const missing = prompt.details;
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(" "));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(" "));
  }
  return provider.interactionFinished(req, res, { consent: { grantId: await grant.save() } }, { mergeWithLastSubmission: true });
}

const callback = provider.callback();
server.on("request", (req, res) => {
  if (req.url.startsWith("/interaction/")) {
    interaction(req, res).catch((error) => {
      res.statusCode = 500;
      res.end(String(error));
    });
  } else {
    callback(req, res);
  }
});
process.stdout.write(JSON.stringify({ issuer }) + "\n");
