CREATE TABLE "api_keys" (
	"id" text PRIMARY KEY NOT NULL,
	"tenant_id" text NOT NULL,
	"name" text NOT NULL,
	"roles" text[] NOT NULL,
	"key_hash" text NOT NULL,
	"created_at" timestamp (3) with time zone NOT NULL,
	"expires_at" timestamp (3) with time zone,
	"revoked_at" timestamp (3) with time zone
);
--> statement-breakpoint
ALTER TABLE "tenants" DROP CONSTRAINT "tenants_key_id_unique";--> statement-breakpoint
ALTER TABLE "audit" ADD COLUMN "key_id" text;--> statement-breakpoint
ALTER TABLE "audit" ADD COLUMN "request_id" text;--> statement-breakpoint
ALTER TABLE "audit" ADD COLUMN "root_trajectory_id" text;--> statement-breakpoint
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "api_keys_tenant_idx" ON "api_keys" USING btree ("tenant_id");--> statement-breakpoint
CREATE INDEX "audit_root_trajectory_idx" ON "audit" USING btree ("tenant_id","root_trajectory_id","pos");--> statement-breakpoint
-- Hand-added (issue 14): each tenant's existing key becomes an admin key named 'initial', same id and
-- hash, so it keeps working; only then are the tenant's own key columns dropped. Existing audit rows keep
-- key_id, request_id and root_trajectory_id null: filling them in would change their hashes.
INSERT INTO "api_keys" ("id", "tenant_id", "name", "roles", "key_hash", "created_at") SELECT "key_id", "id", 'initial', ARRAY['admin'], "key_hash", "created_at" FROM "tenants";--> statement-breakpoint
ALTER TABLE "tenants" DROP COLUMN "key_id";--> statement-breakpoint
ALTER TABLE "tenants" DROP COLUMN "key_hash";