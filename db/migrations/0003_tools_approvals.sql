CREATE TABLE "approvals" (
	"id" text PRIMARY KEY NOT NULL,
	"tenant_id" text NOT NULL,
	"capability_id" text NOT NULL,
	"trajectory_id" text NOT NULL,
	"tool" text NOT NULL,
	"tool_version" integer NOT NULL,
	"side_effect" text NOT NULL,
	"call_id" text,
	"op" text NOT NULL,
	"target" jsonb NOT NULL,
	"args" jsonb NOT NULL,
	"cost" numeric(39, 0) NOT NULL,
	"claims" jsonb NOT NULL,
	"state" text NOT NULL,
	"created_at" timestamp (3) with time zone NOT NULL,
	"expires_at" timestamp (3) with time zone NOT NULL,
	"resolved_at" timestamp (3) with time zone,
	"resolved_by" text,
	"note" text,
	"outcome" jsonb,
	CONSTRAINT "approvals_state_ck" CHECK ("approvals"."state" IN ('pending', 'approved', 'rejected', 'expired'))
);
--> statement-breakpoint
CREATE TABLE "tools" (
	"tenant_id" text NOT NULL,
	"name" text NOT NULL,
	"version" integer NOT NULL,
	"description" text NOT NULL,
	"input_schema" jsonb NOT NULL,
	"side_effect" text NOT NULL,
	"right" text NOT NULL,
	"target" jsonb NOT NULL,
	"warnings" jsonb NOT NULL,
	"key_id" text,
	"created_at" timestamp (3) with time zone NOT NULL,
	CONSTRAINT "tools_tenant_id_name_version_pk" PRIMARY KEY("tenant_id","name","version")
);
--> statement-breakpoint
ALTER TABLE "approvals" ADD CONSTRAINT "approvals_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "tools" ADD CONSTRAINT "tools_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "approvals_pending_idx" ON "approvals" USING btree ("tenant_id","state","created_at");