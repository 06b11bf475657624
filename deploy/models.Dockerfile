# syntax=docker/dockerfile:1
# The models of one release, for deploy/k8s: Triton's repository and the workers' bundle
# (tokenizer, decision model) side by side, so they are versioned, pulled and rolled back
# together. The models-publish Job (deploy/k8s/models.yaml) copies them onto the shared models
# volume; a shell and `cp` are all this image needs.
# Build context: a folder holding bundle/ (text/ and decision/, `modstream models`) and
# triton_repo/ (`modstream build-repo`):
#   mkdir -p build/models && cp -rL ~/.cache/modstream/current build/models/bundle \
#     && cp -r build/triton_repo build/models/triton_repo
#   docker build -f deploy/models.Dockerfile -t modstream-models:local build/models
FROM busybox:1.37
COPY bundle /models/bundle
COPY triton_repo /models/triton_repo
USER 10001
