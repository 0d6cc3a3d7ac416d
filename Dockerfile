FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 STATIC_ROOT=/app/staticfiles
WORKDIR /app
COPY pyproject.toml README.md ./
COPY sparkops sparkops
COPY dashboard dashboard
COPY templates templates
COPY static static
COPY manage.py ./
RUN pip install --no-cache-dir -e . && SECRET_KEY=build-only python manage.py collectstatic --noinput -v0
EXPOSE 8000
CMD ["uvicorn", "sparkops.asgi:application", "--host", "0.0.0.0", "--port", "8000"]
