ALTER TABLE "api_keys" ADD COLUMN "created_by" text;--> statement-breakpoint
CREATE INDEX "api_keys_created_by_idx" ON "api_keys" USING btree ("tenant_id","created_by");