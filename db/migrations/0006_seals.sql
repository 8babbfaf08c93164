ALTER TABLE "approvals" ADD COLUMN "seal" text;--> statement-breakpoint
ALTER TABLE "idempotency" ADD COLUMN "seal" text;--> statement-breakpoint
ALTER TABLE "tools" ADD COLUMN "seal" text;--> statement-breakpoint
CREATE INDEX "audit_approval_idx" ON "audit" USING btree ("tenant_id",("detail"->>'approval_id')) WHERE "audit"."event" = 'approve' AND jsonb_exists("audit"."detail", 'approval_id');